"""A submission's life: validate, resolve, build, queue boots, analyse, mail.

`pipeline` moves a submission from the form to its jobs; `analysis`
compares the base's and the candidate's samples with kperf.stats and stores
the verdicts once the boots are in.
"""
