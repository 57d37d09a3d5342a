// A library built against OmniLearn that registers nothing: a worker must refuse it at start.
#include <omnilearn/omnilearn.hpp>

int empty_test_lib_unused() { return 0; }
