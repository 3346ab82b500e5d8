# SPDX-License-Identifier: Apache-2.0
# Install rules: libkolo.so + kolo.h, a CMake package (find_package(kolo) -> kolo::kolo) and a
# pkg-config file (pkg-config --cflags --libs kolo).
include(CMakePackageConfigHelpers)

install(TARGETS kolo EXPORT koloTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  PUBLIC_HEADER DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT koloTargets NAMESPACE kolo:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kolo)

file(WRITE ${PROJECT_BINARY_DIR}/koloConfig.cmake.in
  "@PACKAGE_INIT@\ninclude(\"\${CMAKE_CURRENT_LIST_DIR}/koloTargets.cmake\")\ncheck_required_components(kolo)\n")
configure_package_config_file(${PROJECT_BINARY_DIR}/koloConfig.cmake.in
  ${PROJECT_BINARY_DIR}/koloConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kolo)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/koloConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/koloConfig.cmake ${PROJECT_BINARY_DIR}/koloConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kolo)

configure_file(${PROJECT_SOURCE_DIR}/cmake/kolo.pc.in ${PROJECT_BINARY_DIR}/kolo.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/kolo.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
