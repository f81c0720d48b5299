"""The life of a row: state transitions, status history, queueing work by task name.

`states` is the only place a status changes (and writes the StatusChange
row); `owners` is the life shared by the two kinds of work that own jobs, a
submission and a tracked commit; `dispatch` sends a Celery task by its name in
`task_names` without importing the task module. Everything else in kperf.core
moves rows through here.
"""
