# cmake -DIN=dir/x/y.proto -DOUT_DIR=dir2 -DPROTO=x/y.proto -DMESSAGES="A;B" -DSIDE=x/y_presence.proto
#         -P proto3_optional.cmake
#
# protoc-c before 1.5 refuses proto3 `optional` fields ("code generator
# hasn't been updated to support optional fields in proto3"). For the C code
# only, this writes a copy of PROTO under OUT_DIR with the named top-level
# messages moved to SIDE, a proto2 file of the same package that PROTO then
# imports: there protoc-c gives each `optional` field the has_<name> member
# that protoc-c 1.5 gives proto3 `optional`, with the same wire encoding
# (tag, number and type; presence on the wire; explicit zeros sent). The
# C type names stay the same (same package, same message names).
#
# Only flat messages of `optional` scalar fields can move (proto2 would
# change what anything else means); anything else fails the build. The
# descriptor set and every other language keep using PROTO itself.
foreach(v IN ITEMS IN OUT_DIR PROTO MESSAGES SIDE)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "proto3_optional.cmake: -D${v}= is required")
  endif()
endforeach()

file(READ "${IN}" text)
string(REGEX MATCH "\npackage [A-Za-z0-9_.]+;" package "${text}")
if(NOT package)
  message(FATAL_ERROR "${IN}: no package line")
endif()

set(moved "")
foreach(name IN LISTS MESSAGES)
  string(FIND "${text}" "\nmessage ${name} {\n" start)
  if(start LESS 0)
    message(FATAL_ERROR "${IN}: no top-level 'message ${name} {'")
  endif()
  string(SUBSTRING "${text}" ${start} -1 rest)
  string(FIND "${rest}" "\n}\n" end)
  math(EXPR len "${end} + 3")
  string(SUBSTRING "${rest}" 0 ${len} block)
  # Inside the braces: comments, blank lines and `optional` scalar fields only.
  string(REGEX REPLACE "//[^\n]*" "" body "${block}")
  string(REPLACE "\nmessage ${name} {\n" "" body "${body}")
  string(REGEX REPLACE "\n}\n$" "" body "${body}")
  string(REGEX REPLACE
         "[ \t]*optional (u?int32|u?int64|s?fixed32|s?fixed64|sint32|sint64|double|float|bool) [a-z_0-9]+ = [0-9]+;"
         "" body "${body}")
  if(NOT body MATCHES "^[ \t\n]*$")
    message(FATAL_ERROR "${IN}: message ${name} may hold only `optional` scalar fields "
                        "to be moved to proto2 for protoc-c; left: ${body}")
  endif()
  string(REPLACE "${block}" "\n" text "${text}")
  string(APPEND moved "${block}")
endforeach()

string(REPLACE "${package}" "${package}\n\nimport \"${SIDE}\";" text "${text}")
file(WRITE "${OUT_DIR}/${PROTO}"
     "// Generated from ${PROTO} for protoc-c; do not edit.\n${text}")
file(WRITE "${OUT_DIR}/${SIDE}"
     "// Generated from ${PROTO} for protoc-c; do not edit.\n"
     "syntax = \"proto2\";\n${package}\n${moved}")
