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
# Only flat messages of `optional` fields can move (proto2 would change what
# anything else means); anything else fails the build. A field may be
#   optional <scalar>          copied as it is;
#   optional string | bytes    copied as it is: a pointer in C, NULL when
#                              absent (code reading one takes NULL and "" as
#                              absent, as it must with protoc-c 1.5 too);
#   optional <Enum of PROTO>   copied as it is, with a proto2 copy of the enum
#                              nested in the moved message (a proto2 message
#                              cannot use a proto3 enum, and nested, its value
#                              names do not clash with the original's). The
#                              field resolves to the nested copy: same number,
#                              same value names (JSON), same varint on the
#                              wire, has_<name> in C as protoc-c 1.5 gives;
#                              only the C enum type's name differs
#                              (Pkg__Msg__Enum), and C converts it to and from
#                              int either way.
#   repeated <numeric scalar> copied with [packed = true]: proto3 packs
#                              them by default, proto2 does not; packed,
#                              the wire is the same.
# The descriptor set and every other language keep using PROTO itself.
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
  # Inside the braces: comments, blank lines and `optional` fields only.
  string(REGEX REPLACE "//[^\n]*" "" body "${block}")
  string(REPLACE "\nmessage ${name} {\n" "" body "${body}")
  string(REGEX REPLACE "\n}\n$" "" body "${body}")
  string(REGEX REPLACE
         "[ \t]*optional (u?int32|u?int64|s?fixed32|s?fixed64|sint32|sint64|double|float|bool|string|bytes) [a-z_0-9]+ = [0-9]+;"
         "" body "${body}")
  string(REGEX REPLACE
         "[ \t]*repeated (u?int32|u?int64|s?fixed32|s?fixed64|sint32|sint64|double|float|bool) [a-z_0-9]+ = [0-9]+;"
         "" body "${body}")
  # Enum-typed fields (without the `;`, which would split the CMake list).
  string(REGEX MATCHALL "optional [A-Z][A-Za-z0-9_]* [a-z_0-9]+ = [0-9]+" typed "${body}")
  string(REGEX REPLACE "[ \t]*optional [A-Z][A-Za-z0-9_]* [a-z_0-9]+ = [0-9]+;" "" body "${body}")
  if(NOT body MATCHES "^[ \t\n]*$")
    message(FATAL_ERROR "${IN}: message ${name} may hold only `optional` scalar, string, "
                        "bytes or enum fields to be moved to proto2 for protoc-c; left: ${body}")
  endif()
  set(nested "")
  set(enums "")
  foreach(field IN LISTS typed)
    string(REGEX REPLACE "^optional ([A-Za-z0-9_]+) .*" "\\1" type "${field}")
    string(FIND "${text}" "\nenum ${type} {\n" estart)
    if(estart LESS 0)
      message(FATAL_ERROR "${IN}: ${name}.${field}: ${type} is not a top-level enum; only "
                          "enum-typed fields can be moved to proto2 for protoc-c")
    endif()
    list(FIND enums ${type} seen) # (IN_LIST needs a policy -P scripts lack)
    if(seen LESS 0)
      list(APPEND enums ${type})
      string(SUBSTRING "${text}" ${estart} -1 erest)
      string(FIND "${erest}" "\n}\n" eend)
      math(EXPR elen "${eend} + 2")
      string(SUBSTRING "${erest}" 1 ${elen} enum_block)
      string(REGEX REPLACE "\n(.)" "\n  \\1" enum_block "  ${enum_block}")
      string(APPEND nested "${enum_block}")
    endif()
  endforeach()
  string(REPLACE "${block}" "\n" text "${text}")
  string(REGEX REPLACE
         "(repeated (u?int32|u?int64|s?fixed32|s?fixed64|sint32|sint64|double|float|bool) [a-z_0-9]+ = [0-9]+);"
         "\\1 [packed = true];" block "${block}")
  if(nested)
    string(REPLACE "\nmessage ${name} {\n"
           "\nmessage ${name} {\n  // proto2 copies of the enums its fields use (proto3_optional.cmake)\n${nested}"
           block "${block}")
  endif()
  string(APPEND moved "${block}")
endforeach()

string(REPLACE "${package}" "${package}\n\nimport \"${SIDE}\";" text "${text}")
file(WRITE "${OUT_DIR}/${PROTO}"
     "// Generated from ${PROTO} for protoc-c; do not edit.\n${text}")
file(WRITE "${OUT_DIR}/${SIDE}"
     "// Generated from ${PROTO} for protoc-c; do not edit.\n"
     "syntax = \"proto2\";\n${package}\n${moved}")
