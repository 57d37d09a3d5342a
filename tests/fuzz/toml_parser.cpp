// toml++'s implementation, compiled into the job_spec fuzz target with the fuzz instrumentation.
// Debian ships the parser prebuilt in libtomlplusplus.so, which libFuzzer cannot see into: it
// would steer by job_spec.cpp's coverage alone and rarely get past a syntax error. Definitions
// in the executable take precedence over the shared library's, so ol_jobs' calls land here.
#define TOML_IMPLEMENTATION
#include <toml++/toml.h>
