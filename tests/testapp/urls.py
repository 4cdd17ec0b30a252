from django.urls import path

from tests.testapp import stores

urlpatterns = [path("boards/<str:store_id>/", stores.set_board)]
