"""``manage.py demo_samples``: start the demo's sample runs (again: they are started once)."""

from django.core.management.base import BaseCommand

from project.demo import samples


class Command(BaseCommand):
    help = "Start the demo's sample workflows (each once: a second call returns the same runs)."

    def handle(self, *args, **options):
        for what, workflow, execution_id in samples.start():
            self.stdout.write(f"  {workflow:<20} {what:<34} {execution_id}")
