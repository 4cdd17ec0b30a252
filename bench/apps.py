from django.apps import AppConfig

READY_LINE = "bench worker ready"


class BenchConfig(AppConfig):
    name = "bench"
    label = "bench"
    verbose_name = "Benchmark workloads"

    def ready(self) -> None:
        from celery.signals import worker_ready

        # Workers run at log level WARNING here; say "ready" in a way the runner can see.
        worker_ready.connect(lambda **kwargs: print(READY_LINE, flush=True), weak=False)
