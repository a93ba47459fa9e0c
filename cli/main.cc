#include "common/log.h"
int main() { onehpc::log::Info("placeholder"); return 0; }
