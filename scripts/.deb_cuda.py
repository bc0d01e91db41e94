import sys, os; sys.path.insert(0, os.getcwd())
import torch, fastcomp
from tests.models.zoo import more_transformers_models
spec = [m for m in more_transformers_models() if m.name == "deberta-v2"][0]
torch.manual_seed(0)
model = spec.build().eval().cuda()
inp = {k: v.cuda() for k, v in spec.inputs(spec.sizes[0]).items()}
with torch.no_grad():
    ref = model(**inp)
    f = fastcomp.compile(model)
    for i in range(3):
        out = f(**inp); torch.cuda.synchronize(); print("call", i, "ok", flush=True)
