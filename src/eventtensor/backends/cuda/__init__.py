"""CUDA backend: generated dispatch glue plus the device library in include/, compiled with
NVRTC for sm_90a and launched as one persistent kernel (one CTA per SM)."""
