from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import path

from kperf.core import address_views, git_http, lab_views, plot_views, triage_views, views
from kperf.core.api import api

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/login/", auth_views.LoginView.as_view(template_name="kperf/login.html"), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/v1/", api.urls),
    # Build machines fetch commits from the service's mirrors (docs/builders.md).
    path("builder-git/<int:tree_id>/<path:rest>", git_http.serve, name="builder-git"),
    path("", views.submission_list, name="submission-list"),
    path("submissions/new", views.submission_new, name="submission-new"),
    path("submissions/<int:sub_id>", views.submission_detail, name="submission-detail"),
    path("branches/", views.branch_list, name="branch-list"),
    path("branches/<int:branch_id>", views.branch_detail, name="branch-detail"),
    path("submissions/<int:sub_id>/plots/metric.svg", plot_views.submission_metric, name="submission-plot-metric"),
    path("submissions/<int:sub_id>/plots/shape.svg", plot_views.submission_shape, name="submission-plot-shape"),
    path("branches/<int:branch_id>/plots/series.svg", plot_views.branch_series, name="branch-plot-series"),
    path("builds/<int:build_id>/log", views.build_log, name="build-log"),
    path("jobs/<int:job_id>/console", views.job_console, name="job-console"),
    path("triage/<int:triage_id>", triage_views.change, name="triage-change"),
    path("addresses", address_views.addresses, name="addresses"),
    path("addresses/confirm/<str:token>", address_views.confirm, name="address-confirm"),
    path("lab/", lab_views.lab, name="lab"),
    path("lab/runners/<str:name>/release", lab_views.release, name="lab-release"),
    path("lab/runners/<str:name>/quarantine", lab_views.quarantine, name="lab-quarantine"),
]
