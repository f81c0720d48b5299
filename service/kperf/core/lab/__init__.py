"""The lab: runners, their leases on jobs, calibration, health and tuning, and the queue's order.

A runner claims a job (`leases`), boots the kernel with the job's boot
parameters (`boot_params`, `tuning`), and uploads its samples; base boots
are shared between submissions of one base kernel (`sharing`). Calibration
and the health checks (`calibration`, `runner_health`) decide whether a
runner is fit to measure; `waiting`, `claim_order`, `eta` and `eta_model` say
why queued work waits and how long it will take.
"""
