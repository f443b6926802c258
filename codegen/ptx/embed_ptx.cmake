# Wraps the megakernel's PTX text (IN) in a C++ raw string literal (OUT) for
# codegen/ptx/megakernel_ptx.cpp, so cuvilc carries the PTX it puts into packages.
file(READ "${IN}" text)
file(WRITE "${OUT}.tmp" "R\"cuvilptx(${text})cuvilptx\"\n")
file(RENAME "${OUT}.tmp" "${OUT}")
