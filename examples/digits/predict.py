"""The digits example from Python (docs/python.md): compile, load, run, print the class."""
import os, sys, tempfile
import numpy as np
import cuvil

here = os.path.dirname(os.path.abspath(__file__))
package = cuvil.compile(os.path.join(here, "digits.onnx"), os.path.join(tempfile.mkdtemp(), "digits.cuvir"))
session = cuvil.load(package).session(threads=2)
(logits,) = session.run(None, {"image": np.load(sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "sample.npy"))})
print("predicted digit:", int(np.argmax(logits[0])))
