#!/bin/sh
# Slurm epilog for mpr jobs (slurm.conf: Epilog=/path/to/slurm-epilog.sh).
#
# Ranks started by srun name their shared-memory files /dev/shm/mpr-JOB_STEP_TAG-* (PMI-2)
# or /dev/shm/mpr-slurm_pmix_JOB_STEP_TAG-* (PMIx) and remove them themselves, once every
# rank of the node has them open. A job that Slurm kills in between (a rank killed during
# start-up, scancel, a time limit) cannot; this removes what such a job left, when the job
# ends on the node. (mprun cleans up its own jobs.)
case "$SLURM_JOB_ID" in
    '' | *[!0-9]*) exit 0 ;;
esac
rm -f /dev/shm/mpr-"$SLURM_JOB_ID"_* /dev/shm/mpr-slurm_pmix_"$SLURM_JOB_ID"_*
exit 0
