from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import path

from kperf.core.web import address_pages, git_http, lab_pages, pages, plot_pages, triage_pages
from kperf.core.web.api import api

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/login/", auth_views.LoginView.as_view(template_name="kperf/login.html"), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/v1/", api.urls),
    # Build machines fetch commits from the service's mirrors (docs/builders.md).
    path("builder-git/<int:tree_id>/<path:rest>", git_http.serve, name="builder-git"),
    path("", pages.submission_list, name="submission-list"),
    path("submissions/new", pages.submission_new, name="submission-new"),
    path("submissions/<int:sub_id>", pages.submission_detail, name="submission-detail"),
    path("branches/", pages.branch_list, name="branch-list"),
    path("branches/<int:branch_id>", pages.branch_detail, name="branch-detail"),
    path("submissions/<int:sub_id>/plots/metric.svg", plot_pages.submission_metric, name="submission-plot-metric"),
    path("submissions/<int:sub_id>/plots/shape.svg", plot_pages.submission_shape, name="submission-plot-shape"),
    path("branches/<int:branch_id>/plots/series.svg", plot_pages.branch_series, name="branch-plot-series"),
    path("builds/<int:build_id>/log", pages.build_log, name="build-log"),
    path("jobs/<int:job_id>/console", pages.job_console, name="job-console"),
    path("triage/<int:triage_id>", triage_pages.change, name="triage-change"),
    path("addresses", address_pages.addresses, name="addresses"),
    path("addresses/confirm/<str:token>", address_pages.confirm, name="address-confirm"),
    path("lab/", lab_pages.lab, name="lab"),
    path("lab/runners/<str:name>/release", lab_pages.release, name="lab-release"),
    path("lab/runners/<str:name>/quarantine", lab_pages.quarantine, name="lab-quarantine"),
]
