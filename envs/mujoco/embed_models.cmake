# Writes OUTPUT, a C++ source holding the text of every model file in MODELS
# (a list of paths), as builtin_model_files() of envs/mujoco/model_files.hpp
# declares it. Run by CMake in script mode at build time
# (cmake -DOUTPUT=... -DMODELS=... -P embed_models.cmake), so an edited model
# file is rebuilt into the library by the next build.
set(arrays "")
set(entries "")
set(index 0)
foreach(path ${MODELS})
  get_filename_component(name ${path} NAME)
  file(READ ${path} hex HEX)
  # Two hex digits a byte: 0x.. per byte (unsigned: any byte fits), and a
  # terminating zero.
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)"
         "\\1\n    " bytes "${bytes}")
  string(APPEND arrays "// ${name}\nconst unsigned char file_${index}[] = {\n    ${bytes}0};\n\n")
  string(APPEND entries "      {\"${name}\", {reinterpret_cast<const char*>(file_${index}), sizeof file_${index} - 1}},\n")
  math(EXPR index "${index} + 1")
endforeach()
file(WRITE ${OUTPUT}.tmp "// Generated from envs/mujoco/models/ by envs/mujoco/embed_models.cmake: do not edit.
#include \"envs/mujoco/model_files.hpp\"

namespace troupe::envs::mujoco {

namespace {

${arrays}} // namespace

const std::vector<model_file>& builtin_model_files() {
  static const std::vector<model_file> files = {
${entries}  };
  return files;
}

} // namespace troupe::envs::mujoco
")
# Replaced only when changed, so that an unchanged model recompiles nothing.
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different ${OUTPUT}.tmp ${OUTPUT})
file(REMOVE ${OUTPUT}.tmp)
