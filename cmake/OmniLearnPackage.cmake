# The library users build on: one shared library (libomnilearn.so) holding the runtime, the
# task/actor layer and the driver, behind one public header (include/omnilearn/omnilearn.hpp).
# Only that header is installed: runtime/, core/ and the other folders' headers, ZeroMQ, spdlog and toml++
# stay private (symbols hidden, dependencies linked privately). msgpack-c is the one public
# dependency, because user types travel through their msgpack adaptors.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

#
# The library is made of the very object files the tree's static libraries are built from
# (compiled once, not twice: compile time matters on 2 cores), so those are compiled
# position-independent and with hidden symbols; only the public API (OMNILEARN_API) is exported.
foreach(part ol_atomic_file ol_runtime ol_core ol_client)
  set_target_properties(${part} PROPERTIES
    POSITION_INDEPENDENT_CODE ON
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
endforeach()
add_library(omnilearn_runtime SHARED
  $<TARGET_OBJECTS:ol_atomic_file> $<TARGET_OBJECTS:ol_runtime> $<TARGET_OBJECTS:ol_core>
  $<TARGET_OBJECTS:ol_client>)
add_library(OmniLearn::runtime ALIAS omnilearn_runtime)
set_target_properties(omnilearn_runtime PROPERTIES
  OUTPUT_NAME omnilearn
  EXPORT_NAME runtime
  VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR}
  CXX_VISIBILITY_PRESET hidden
  VISIBILITY_INLINES_HIDDEN ON
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib)
target_compile_options(omnilearn_runtime PRIVATE ${OMNILEARN_WARNINGS})
target_compile_features(omnilearn_runtime PUBLIC cxx_std_20)
target_include_directories(omnilearn_runtime
  PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
         $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
  PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(omnilearn_runtime
  PUBLIC msgpackc-cxx
  PRIVATE cppzmq spdlog::spdlog fmt::fmt tomlplusplus::tomlplusplus Threads::Threads
          ${CMAKE_DL_LIBS})
# Every symbol the library needs is linked in (not left to the program that loads it); not under
# sanitizers, whose runtimes are linked into executables only.
if(NOT OMNILEARN_SANITIZE)
  target_link_options(omnilearn_runtime PRIVATE -Wl,--no-undefined)
endif()

install(TARGETS omnilearn_runtime EXPORT OmniLearnTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES include/omnilearn/omnilearn.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/omnilearn)
install(EXPORT OmniLearnTargets NAMESPACE OmniLearn::
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/OmniLearn)
configure_package_config_file(cmake/OmniLearnConfig.cmake.in
  ${CMAKE_BINARY_DIR}/OmniLearnConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/OmniLearn)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/OmniLearnConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/OmniLearnConfig.cmake
  ${CMAKE_BINARY_DIR}/OmniLearnConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/OmniLearn)
# The omnilearn program too, so an installed prefix runs a cluster for its examples.
install(TARGETS omnilearn RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
