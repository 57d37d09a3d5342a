# What a node needs, installed: both programs, the library and its header (OmniLearnPackage),
# the examples' job files, the docs and systemd units; and CPack's Debian package of all of it
# (scripts/package.sh), for prefix /usr. A worker finds the trainer in <prefix>/libexec/omnilearn
# (cluster/trainer_program.hpp), so an installed tree runs jobs without the build tree.
include(GNUInstallDirs)

if(OMNILEARN_WITH_TORCH)
  install(TARGETS omnilearn-trainer RUNTIME DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/omnilearn)
endif()
install(FILES examples/synthetic_quick.toml examples/fashion_mnist_mlp.toml
              examples/fashion_mnist_cnn.toml
        DESTINATION ${CMAKE_INSTALL_DATADIR}/omnilearn/examples)
install(DIRECTORY examples/torchscript DESTINATION ${CMAKE_INSTALL_DATADIR}/omnilearn/examples)
install(FILES README.md DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/omnilearn)
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/omnilearn/docs
        FILES_MATCHING PATTERN "*.md" PATTERN "*.png")
# The container, Slurm and Kubernetes files (the units are installed below, configured).
install(DIRECTORY deploy/ DESTINATION ${CMAKE_INSTALL_DATADIR}/omnilearn/deploy
        USE_SOURCE_PERMISSIONS PATTERN systemd EXCLUDE)

# The units name the installed program's path, so they are written at install time, for the
# prefix installed to (cmake --install --prefix P, or /usr in the Debian package).
install(CODE "
  set(OMNILEARN_BIN_DIR \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}\")
  set(OMNILEARN_DOC_DIR \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_DATADIR}/doc/omnilearn\")
  foreach(unit omnilearn-head omnilearn-worker)
    configure_file(${PROJECT_SOURCE_DIR}/deploy/systemd/\${unit}.service.in
                   ${CMAKE_BINARY_DIR}/systemd/\${unit}.service @ONLY)
  endforeach()")
install(FILES ${CMAKE_BINARY_DIR}/systemd/omnilearn-head.service
              ${CMAKE_BINARY_DIR}/systemd/omnilearn-worker.service
        DESTINATION lib/systemd/system)

# Debian package: omnilearn_<version>_amd64.deb. Depends come from dpkg-shlibdeps (the runtime
# library packages the programs link: libtorch1.13, libzmq5, ...), never a -dev package, plus
# what the programs read at run time.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME omnilearn)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "OmniLearn maintainers <maintainers@users.noreply.a-seed-2dc22b3c.example>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "elastic, heterogeneity-aware data-parallel training runtime (head, worker, trainer)")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)  # debug info left out: the programs are a fraction of the size
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# Chart.js: the head's dashboard and `omnilearn report` read it from /usr/share/javascript.
# OpenBLAS: Debian's LibTorch calls whichever libblas.so.3 the alternatives point to, and with
# only libblas3 installed that is the reference BLAS: the MLP's forward and backward took 16x
# longer (docs/benchmarks.md). The OpenMP build follows torch::set_num_threads ([train] threads).
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libjs-chart.js, libopenblas0-openmp | libopenblas0")
# The examples' Fashion-MNIST jobs read Debian's copy of the dataset.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "dataset-fashion-mnist")
# cpack packages what scripts/package.sh has built (the programs and the library), not `all`
# (every test and benchmark); `cmake --install` never builds anyway.
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY TRUE)
include(CPack)
