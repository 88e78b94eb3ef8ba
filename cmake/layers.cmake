# The layers of tracecache, bottom to top, as cmake/layers.txt declares them (one row per
# folder: its library and what it may include). Each layer is one static library built from
# its folders' *.cc files. Its headers are visible only through an include
# directory of its own (<build>/include/<layer>/ holds a symlink per folder), which it passes
# on to the layers that link it. So a file can include only headers of its own layer and of
# the layers it links: an include in the wrong direction fails to build ("No such file").
# tests/layering/check_includes.py checks the finer order inside a layer (e.g. capture/ops below
# capture/ir) and that nobody reaches around the fence with a relative path.
# tracecache_check_layer_sources(), called once every layer is declared, fails the configure
# step when a *.cc under a layer root is compiled by nothing (a folder missing from FOLDERS).

# The table, read once: TRACECACHE_LAYER_FOLDERS_<library> lists each library's folders in
# order, TRACECACHE_LAYER_ROOTS the top-level folders.
file(STRINGS ${CMAKE_CURRENT_LIST_DIR}/layers.txt tracecache_layer_rows REGEX "^[^#]")
set(TRACECACHE_LAYER_ROOTS)
foreach(row IN LISTS tracecache_layer_rows)
  string(REGEX REPLACE "[ \t]+" ";" fields "${row}")
  list(GET fields 0 folder)
  list(GET fields 1 library)
  list(APPEND TRACECACHE_LAYER_FOLDERS_${library} ${folder})
  string(REGEX REPLACE "/.*" "" root "${folder}")
  list(APPEND TRACECACHE_LAYER_ROOTS ${root})
endforeach()
list(REMOVE_DUPLICATES TRACECACHE_LAYER_ROOTS)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/layers.txt)

# tracecache_add_layer(<library> [LINKS <target-or-package>...] [EXCLUDE <file>...])
# builds the library from the folders cmake/layers.txt gives it (EXCLUDE: sources that belong
# to an executable).
function(tracecache_add_layer target)
  cmake_parse_arguments(L "" "" "LINKS;EXCLUDE" ${ARGN})
  set(L_FOLDERS ${TRACECACHE_LAYER_FOLDERS_${target}})
  if(NOT L_FOLDERS)
    message(FATAL_ERROR "tracecache_add_layer: cmake/layers.txt has no folder of library ${target}")
  endif()
  set(inc ${PROJECT_BINARY_DIR}/include/${target})
  set(sources)
  foreach(folder IN LISTS L_FOLDERS)
    # A folder inside one already linked (replay/backends/cpu inside backends) is visible through it.
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

# tracecache_check_layer_sources([EXECUTABLES <target>...])
# FATAL_ERROR naming every *.cc under the table's top-level folders (recursively) that no layer
# compiles and that is not a source of one of the EXECUTABLES (cli/main.cc belongs to the
# tracecache binary, python/*.cc to the module).
function(tracecache_check_layer_sources)
  cmake_parse_arguments(C "" "" "EXECUTABLES" ${ARGN})
  set(C_ROOTS ${TRACECACHE_LAYER_ROOTS})
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
                        "Add their folder to cmake/layers.txt (its library and what it may include).")
  endif()
endfunction()
