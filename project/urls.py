from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularSwaggerView

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/durableflow/", include("durableflow.urls")),
    # Swagger UI over the API's schema, with its assets from drf-spectacular-sidecar (no CDN).
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="durableflow:schema"), name="api-docs"),
    path("", RedirectView.as_view(url="/admin/durableflow/execution/", permanent=False)),
]
