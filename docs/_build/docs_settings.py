"""The smallest Django project that can describe durableflow: the docs build reads its
management commands and renders its REST API's OpenAPI schema with it. No database is used."""

SECRET_KEY = "durableflow-docs-build"
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "rest_framework",
    "django_celery_beat",
    "durableflow",
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
ROOT_URLCONF = "docs_urls"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
