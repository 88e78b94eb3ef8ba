# The layers of tracecache, bottom to top (docs/architecture.md). Each layer is one static
# library built from its folders' *.cc files. Its headers are visible only through an include
# directory of its own (<build>/include/<layer>/ holds a symlink per folder), which it passes
# on to the layers that link it. So a file can include only headers of its own layer and of
# the layers it links: an include in the wrong direction fails to build ("No such file").
# tests/layering_test.sh checks the finer order inside a layer (e.g. capture/ops below
# capture/ir) and that nobody reaches around the fence with a relative path.

# tracecache_add_layer(<target> FOLDERS <folder>... [LINKS <target-or-package>...]
#                      [EXCLUDE <file>...])   (EXCLUDE: sources that belong to an executable)
function(tracecache_add_layer target)
  cmake_parse_arguments(L "" "" "FOLDERS;LINKS;EXCLUDE" ${ARGN})
  set(inc ${PROJECT_BINARY_DIR}/include/${target})
  set(sources)
  foreach(folder IN LISTS L_FOLDERS)
    # A folder inside one already linked (backends/cpu inside backends) is visible through it.
    if(NOT IS_DIRECTORY ${inc}/${folder} OR IS_SYMLINK ${inc}/${folder})
      get_filename_component(parent ${inc}/${folder} DIRECTORY)
      file(MAKE_DIRECTORY ${parent})
      file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${folder} ${inc}/${folder} SYMBOLIC)
    endif()
    file(GLOB folder_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${folder}/*.cc)
    list(APPEND sources ${folder_sources})
  endforeach()
  foreach(file IN LISTS L_EXCLUDE)
    list(REMOVE_ITEM sources ${PROJECT_SOURCE_DIR}/${file})
  endforeach()
  add_library(${target} STATIC ${sources})
  target_include_directories(${target} PUBLIC ${inc})
  target_link_libraries(${target} PUBLIC ${L_LINKS})
endfunction()
