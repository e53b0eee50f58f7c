#pragma once
#include <memory>
#include <string>

#include "target.h"

namespace tessera::gpucheck {

// fault_family: for testing the checker itself (--inject-fault): every float downloaded during that family's checks
// has its first element perturbed, so each of its comparisons must fail.
std::unique_ptr<Target> make_cpu_target(const std::string& fault_family = "");

}  // namespace tessera::gpucheck
