"""Stored samples made into results: run and commit summaries, pooled noise and drift, verdict wording.

`summaries` reduces a finished job's samples once, as they arrive;
`noise_pools` and `drift_pools` add them up per machine class for the noise
model and the tracked series' drift; `per_op` divides hardware counters by
the operations a benchmark performed; `outcome` words a verdict the same way
everywhere; `mmtests_import` and `mmtests_export` move results in and out in
mmtests' formats.
"""
