# cmake -DIN=file -DOUT=file.c -DSYMBOL=name -P embed.cmake
# Writes file.c defining `const unsigned char name[]` and `const size_t name_len`.
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" n)
math(EXPR len "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
file(WRITE ${OUT} "/* Generated from ${IN}; do not edit. */\n#include <stddef.h>\n"
     "const unsigned char ${SYMBOL}[] = {\n${bytes}\n};\n"
     "const size_t ${SYMBOL}_len = ${len};\n")
