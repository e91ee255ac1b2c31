"""Finding and loading the released packages, and what their kernels need to run here:
``sglang_loader`` and ``vllm_loader`` (an installed package, or a release's extracted
wheel), and Triton's interpreter made to run their kernels (``interpreter_patching``,
``interpreter_libdevice``). Leaves: they import nothing of the harness beyond each other,
so the plug-ins, the conventions and the release contracts all build on them."""
