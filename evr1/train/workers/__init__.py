"""What runs inside the Ray actors: the FSDP2 policy rank (`policy`) and the rollout engine (`rollout`),
with the pieces only a rank uses (reading and encoding prompts, precision, sequence parallelism,
sharded loading). Workers import `evr1.train.protocol`, never the driver that sequences them.
"""
