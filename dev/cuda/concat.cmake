# concat.cmake — cmake -DA=... -DB=... -DOUT=... -P concat.cmake: OUT = A then B (one translation unit of a
# shipping kernel file and its kept versions, dev/cuda/dev.cmake)
file(READ ${A} a)
file(READ ${B} b)
file(WRITE ${OUT}.tmp "${a}\n${b}")
file(RENAME ${OUT}.tmp ${OUT})
