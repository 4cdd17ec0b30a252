from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class DurableflowConfig(AppConfig):
    name = "durableflow"
    verbose_name = "Durable workflows"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from durableflow import checks, conf, dispatch  # noqa: F401 - registers checks and the settings receiver

        # Celery publishes from a transactional step's body are refused (TRANSACTION_FORBIDDEN_CALL).
        dispatch.guard_publishes()

        # Every installed app's ``workflows`` module registers its workflows on import.
        autodiscover_modules("workflows")
