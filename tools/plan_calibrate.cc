// Placeholder until the measurement code lands (the calib branch replaces this file).
#include "tools/plan_calibrate.h"

#include <cstdio>

namespace tessera {

int RunPlanCalibrate(int argc, char** argv) {
  std::fprintf(stderr, "tessera-plan calibrate: not implemented in this build\n");
  return 1;
}

}  // namespace tessera
