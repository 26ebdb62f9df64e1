# The training image for pyxis/enroot sites (srun --container-image), from an NGC PyTorch container, as NVIDIA's
# MLPerf repositories build theirs. The same stack as singularity/maskrcnn.def (tests/launch/test_singularity.py
# keeps the two equal): NGC's CUDA torch, torchvision, numpy, pandas, scipy and pyyaml as they are, our packages at
# exact versions without their dependencies, the package itself (nothing to compile), the bind points.
#   docker build -t maskrcnn .                          # or podman build; FROM_IMAGE_NAME picks another NGC tag
#   enroot import -o maskrcnn.sqsh dockerd://maskrcnn   # the squashfs file pyxis runs: CONTAINER=$PWD/maskrcnn.sqsh
# (or push the image to your registry and set CONTAINER to its name). The job binds its checkout over
# /workspace/object_detection, so the code that runs is the checkout's, as with Singularity.
ARG FROM_IMAGE_NAME=nvcr.io/nvidia/pytorch:25.05-py3
FROM ${FROM_IMAGE_NAME}

WORKDIR /workspace/object_detection
COPY singularity/requirements.txt singularity/requirements.txt
RUN python -m pip install --no-cache-dir --no-deps -r singularity/requirements.txt
COPY . .
RUN python -m pip install --no-cache-dir --no-deps --no-build-isolation -e . \
 && mkdir -p /data /results /coco/models /workspace/shared \
 && chmod -R a+rX /workspace/object_detection

ENV PYTHONNOUSERSITE=1 OMP_NUM_THREADS=1 OPENCV_FOR_THREADS_NUM=1 PYTHONUNBUFFERED=1 DATADIR=/data LOGDIR=/results

# what a job needs before it trains (singularity/maskrcnn.def's %test)
RUN python -c "import bind_launch, maskrcnn_benchmark, mlperf_logging, torch; print('torch', torch.__version__)" \
 && python -c "import mlperf_logging.compliance_checker.mlp_compliance, pycocotools, yacs" \
 && python -c "import mlperf_logging.rcp_checker.rcp_checker, mlperf_logging.result_summarizer.result_summarizer" \
 && python -m bind_launch --dry-run --nproc_per_node=1 tools/train_mlperf.py
