// Compiles against the installed device-side API (abf::cuda): its headers
// and the CUDA Toolkit's they include. Built, never run.
#include <abf/cuda/device_filter.hpp>
#include <abf/cuda/view.hpp>

abf::Result<abf::cuda::DeviceInfo> consumer_device() { return abf::cuda::current_device(); }
