// Device selection shared by the CUDA bindings: the runtime's current device is per host thread, so every entry
// point that launches or copies makes sure this thread has it set (and that the device initialised at all).
#pragma once

namespace tessera::gpu {

// Initialises the CUDA device on first use (throws a DeviceError when there is no usable device) and makes it
// current on the calling thread.
void ensure_current_device();

}  // namespace tessera::gpu
