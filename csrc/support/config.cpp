#include "support/config.h"

namespace fastcomp {

Config& config() {
  static Config c;
  return c;
}

}  // namespace fastcomp
