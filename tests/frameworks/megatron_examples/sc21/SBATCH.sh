# Test fixture: NVIDIA/Megatron-LM examples/academic_paper_scripts/sc21/SBATCH.sh @d98e8a64 (2026-08-22), unchanged below this line.
#!/bin/bash


sbatch -p ${SLURM_PARTITION} \
       -A ${SLURM_ACCOUNT} \
       --job-name=${JOB_NAME} \
       --nodes=${NNODES} \
       --export=MEGATRON_CODE_DIR,MEGATRON_PARAMS,DOCKER_MOUNT_DIR SRUN.sh

exit 0



