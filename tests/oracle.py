"""NumPy oracles shared by the kernel and collective tests."""

import numpy as np

# gloocy op name -> the NumPy ufunc that defines its meaning
UFUNCS = {
    "SUM": np.add, "PROD": np.multiply, "MIN": np.minimum, "MAX": np.maximum,
    "BAND": np.bitwise_and, "BOR": np.bitwise_or, "BXOR": np.bitwise_xor,
    "LAND": np.logical_and, "LOR": np.logical_or, "LXOR": np.logical_xor,
}
INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
FLOATS = ["float16", "float32", "float64"]
DTYPES = INTS + FLOATS + ["bool"]
ARITH = ["SUM", "PROD", "MIN", "MAX"]
BITS = ["BAND", "BOR", "BXOR", "LAND", "LOR", "LXOR"]
