# The layers of tracecache, bottom to top (docs/architecture.md). Each layer is one static
# library built from its folders' *.cc files. Its headers are visible only through an include
# directory of its own (<build>/include/<layer>/ holds a symlink per folder), which it passes
# on to the layers that link it. So a file can include only headers of its own layer and of
# the layers it links: an include in the wrong direction fails to build ("No such file").
# tests/layering/check_includes.py checks the finer order inside a layer (e.g. capture/ops below
# capture/ir) and that nobody reaches around the fence with a relative path.
# tracecache_check_layer_sources(), called once every layer is declared, fails the configure
# step when a *.cc under a layer root is compiled by nothing (a folder missing from FOLDERS).

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
  set_property(GLOBAL APPEND PROPERTY TRACECACHE_LAYER_SOURCES ${sources})
endfunction()

# tracecache_check_layer_sources(ROOTS <folder>... [EXECUTABLES <target>...])
# FATAL_ERROR naming every *.cc under the ROOTS (recursively) that no layer compiles and that is
# not a source of one of the EXECUTABLES (cli/main.cc belongs to the tracecache binary).
function(tracecache_check_layer_sources)
  cmake_parse_arguments(C "" "" "ROOTS;EXECUTABLES" ${ARGN})
  get_property(compiled GLOBAL PROPERTY TRACECACHE_LAYER_SOURCES)
  foreach(exe IN LISTS C_EXECUTABLES)
    get_target_property(exe_sources ${exe} SOURCES)
    get_target_property(exe_dir ${exe} SOURCE_DIR)
    foreach(source IN LISTS exe_sources)
      cmake_path(ABSOLUTE_PATH source BASE_DIRECTORY ${exe_dir} NORMALIZE)
      list(APPEND compiled ${source})
    endforeach()
  endforeach()
  set(orphans)
  foreach(root IN LISTS C_ROOTS)
    file(GLOB_RECURSE root_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${root}/*.cc)
    foreach(source IN LISTS root_sources)
      if(NOT source IN_LIST compiled)
        file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${source})
        list(APPEND orphans ${rel})
      endif()
    endforeach()
  endforeach()
  if(orphans)
    list(JOIN orphans "\n  " orphan_lines)
    message(FATAL_ERROR "No layer compiles these sources:\n  ${orphan_lines}\n"
                        "Add their folder to its layer's FOLDERS in CMakeLists.txt and to ALLOWED in "
                        "tests/layering/check_includes.py.")
  endif()
endfunction()
