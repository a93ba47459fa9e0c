START_SCRIPT_BASE64="ZWNobyBoaQ=="
A="q\"b\\d\$x\`c\n"
B="one \
two"
