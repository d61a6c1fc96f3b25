# The layers and what each may include (docs/architecture.md):
#   base < kernels < envs < learners < actors < edge < runtime < cli
# Each layer folder has a CMakeLists.txt that makes its library with
# troupe_layer() and names the folders it may include with troupe_layer_view().
# A layer's sources see the repository only through that view, so an include
# that runs back up a layer ("actors/..." from envs/) does not compile.

# A library of the .cpp files of `dir` (and its cpu/ subfolder); sources are
# picked up by folder, so adding a file needs no edit. The cuda/ subfolders go
# into the CUDA plugin, libtroupe_cuda.so (learners/CMakeLists.txt), never
# into a layer.
function(troupe_layer name dir)
  file(GLOB srcs CONFIGURE_DEPENDS ${dir}/*.cpp ${dir}/cpu/*.cpp)
  list(FILTER srcs EXCLUDE REGEX ".*/main\\.cpp$")
  if(srcs)
    add_library(${name} STATIC ${srcs})
  else()
    # A layer without sources yet still takes part in the dependency graph.
    file(WRITE ${CMAKE_BINARY_DIR}/empty_${name}.cpp "")
    add_library(${name} STATIC ${CMAKE_BINARY_DIR}/empty_${name}.cpp)
  endif()
  target_link_libraries(${name} PUBLIC troupe_options)
endfunction()

# troupe_layer_view(<target> [PRIVATE] <folder>... [EXCEPT <folder/sub>...]): `target`
# includes ("folder/file.hpp") from these folders of the repository only.
# The view is a folder of the build with one link per visible folder; a folder
# with an EXCEPT subfolder becomes a real folder linking each of its entries
# but the excepted ones (runtime without runtime/cli, say). Public for the
# target's users (its headers include from the same folders) unless PRIVATE:
# an installed library's users see include/ only.
function(troupe_layer_view target)
  cmake_parse_arguments(PARSE_ARGV 1 view "PRIVATE" "" "EXCEPT")
  set(root ${CMAKE_BINARY_DIR}/layer_views/${target})
  file(REMOVE_RECURSE ${root})
  file(MAKE_DIRECTORY ${root})
  foreach(folder ${view_UNPARSED_ARGUMENTS})
    set(excepted "")
    foreach(e ${view_EXCEPT})
      if(e MATCHES "^${folder}/([^/]+)$")
        list(APPEND excepted ${CMAKE_MATCH_1})
      endif()
    endforeach()
    if(NOT excepted)
      file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${folder} ${root}/${folder} SYMBOLIC)
      continue()
    endif()
    file(MAKE_DIRECTORY ${root}/${folder})
    # CONFIGURE_DEPENDS: a file added to the folder re-runs CMake, which links it.
    file(GLOB entries CONFIGURE_DEPENDS LIST_DIRECTORIES true RELATIVE
         ${PROJECT_SOURCE_DIR}/${folder} ${PROJECT_SOURCE_DIR}/${folder}/*)
    foreach(entry ${entries})
      if(NOT entry IN_LIST excepted)
        file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${folder}/${entry} ${root}/${folder}/${entry}
             SYMBOLIC)
      endif()
    endforeach()
  endforeach()
  if(view_PRIVATE)
    target_include_directories(${target} PRIVATE ${root})
  else()
    target_include_directories(${target} PUBLIC ${root})
  endif()
endfunction()
