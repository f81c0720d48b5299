"""`kperf`, the users' command line: `main` parses and dispatches; one module per group of sub-commands.

`client` talks to the REST API (login, tokens, errors); `status` and
`progress` show a submission; `series`, `track`, `triage`, `runners`,
`addresses` and `mmtests` are their sub-commands.
"""
