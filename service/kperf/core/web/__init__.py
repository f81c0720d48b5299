"""The web layer: pages, the REST API (`api`), pictures, and the guards in front of them.

Nothing in the domain packages imports from here. `presenters` gives the one
JSON shape of a submission or tracked branch that the API, the CLI and the
pages share; `plots` draws SVG from `plot_data`; `request_guard`, `throttle`
and `actors` sit in the request path (bad input, login throttling, who is
acting); `git_http` serves the service's mirrors to build machines.
"""
