# Helpers that make every folder look the same: one library per folder, one ctest per test file.

set(OMNILEARN_WARNINGS -Wall -Wextra -Wno-unused-parameter)

if(OMNILEARN_SANITIZE)
  add_compile_options(-fsanitize=${OMNILEARN_SANITIZE} -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${OMNILEARN_SANITIZE})
endif()

# omnilearn_library(<target> SOURCES ... [DEPS ...] [PRIVATE_DEPS ...])
# The folder's public headers are included as "<folder>/<header>.hpp" from the repo root.
function(omnilearn_library target)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${target} STATIC ${ARG_SOURCES})
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR})
  target_compile_options(${target} PRIVATE ${OMNILEARN_WARNINGS})
  target_link_libraries(${target} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
endfunction()

# omnilearn_test(<name> SOURCES ... [DEPS ...] [TIMEOUT s] [LABELS ...] [RUN_SERIAL])
# One GoogleTest executable per test file, registered as one ctest with a timeout, so a hung
# test fails on its own instead of stalling the suite.
function(omnilearn_test name)
  cmake_parse_arguments(ARG "RUN_SERIAL" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 60)
  endif()
  # The timeout is a hang guard, not a performance figure. Sanitized code runs 2-15x slower,
  # and CI lands on machines up to 4x slower than this project's (a 19 s TSan case timed out at
  # 60 s there): three times the guard under sanitizers, for guards under 5 minutes (a longer
  # one is already loose, and a hang must still fail well within CI's time).
  if(OMNILEARN_SANITIZE AND ARG_TIMEOUT LESS 300)
    math(EXPR ARG_TIMEOUT "${ARG_TIMEOUT} * 3")
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${OMNILEARN_WARNINGS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main Threads::Threads)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES TIMEOUT ${ARG_TIMEOUT}
    ENVIRONMENT "OMNILEARN_BIN=$<TARGET_FILE_DIR:omnilearn>;OMNILEARN_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
  if(ARG_LABELS)
    set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}")
  endif()
  if(ARG_RUN_SERIAL)
    set_tests_properties(${name} PROPERTIES RUN_SERIAL TRUE)
  endif()
endfunction()
