from django.urls import include, path

urlpatterns = [path("api/durableflow/", include("durableflow.urls"))]
