# `cmake --install build --prefix P` and `cpack -G DEB` (included by the top CMakeLists.txt):
#   P/bin/vitk, P/lib/libvitk.so.*, P/include/vitk/{vitk,opencv,error}.h,
#   P/lib/cmake/vitk/ (find_package(vitk) -> vitk::vitk), P/lib/pkgconfig/vitk.pc,
#   P/share/vitk/models/ (the bundled models `vitk classify` and `vitk caption` default to) and,
#   from tools/python/, the module in P/lib/python3/dist-packages/vitk.
include(CMakePackageConfigHelpers)

set_target_properties(vitk_shared PROPERTIES EXPORT_NAME vitk)
target_compile_features(vitk_shared INTERFACE cxx_std_17)
# Installed, each finds libvitk in P/lib wherever P is.
set_target_properties(vitk PROPERTIES INSTALL_RPATH "$ORIGIN/../lib")

install(TARGETS vitk RUNTIME DESTINATION bin)
install(TARGETS vitk_shared EXPORT vitkTargets LIBRARY DESTINATION lib)
install(FILES ${VITK_PUBLIC_HEADERS} DESTINATION include/vitk)
install(EXPORT vitkTargets NAMESPACE vitk:: DESTINATION lib/cmake/vitk)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/vitkConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/package/vitkConfig.cmake
                              INSTALL_DESTINATION lib/cmake/vitk)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/package/vitkConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/package/vitkConfig.cmake
              ${CMAKE_BINARY_DIR}/package/vitkConfigVersion.cmake DESTINATION lib/cmake/vitk)
configure_file(${CMAKE_CURRENT_LIST_DIR}/vitk.pc.in ${CMAKE_BINARY_DIR}/package/vitk.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/package/vitk.pc DESTINATION lib/pkgconfig)
install(FILES ${CMAKE_SOURCE_DIR}/vit/models/fmnist-vit.h5
              ${CMAKE_SOURCE_DIR}/vit/models/scenes-caption.h5 DESTINATION share/vitk/models)

# The .deb: Depends are the Debian packages of the shared libraries the binaries link
# (dpkg-shlibdeps), and the module's Python and numpy.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME vitk)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Transformers on CPUs: image classification, translation and captioning")
set(CPACK_PACKAGE_CONTACT "vitk developers <vitk@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "python3, python3-numpy")
set(CPACK_DEBIAN_PACKAGE_SECTION science)
include(CPack)
