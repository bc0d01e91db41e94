"""Op templates the generator fills in: `{t}` is a tensor operand, `{o}` another one (or a scalar), `{d}`/`{d2}` dims
of `{t}`, `{a}`/`{lo}`/`{hi}` literals, `{n}`/`{m}` int expressions, `{perm}` a permutation, `{dk}` the device
keyword of factories. Each entry's kind names the statements made from it (and the failures they minimize to)."""

UNARY = [  # (kind, template, float only)
    ("relu", "torch.relu({t})", False), ("sigmoid", "{t}.sigmoid()", True), ("tanh", "torch.tanh({t})", True),
    ("exp", "{t}.exp()", True), ("abs", "{t}.abs()", False), ("neg", "-{t}", False), ("square", "{t} * {t}", False),
    ("sqrt", "torch.sqrt({t}.abs())", True), ("gelu", "F.gelu({t})", True), ("silu", "F.silu({t})", True),
    ("clamp", "{t}.clamp(min={a})", False), ("clamp2", "{t}.clamp({lo}, {hi})", False),
    ("where", "torch.where({t} > 0, {t}, {t} * {a})", False), ("pow", "{t} ** 2", False),
    ("pow_float", "{t}.pow({a})", True), ("sin", "{t}.sin()", True), ("log", "torch.log({t}.abs() + 1)", True),
    ("reciprocal", "{t}.reciprocal()", False), ("floor", "{t}.floor()", True), ("round", "torch.round({t})", False),
    ("sign", "torch.sign({t})", False), ("bitnot", "~{t}", False), ("logical_not", "{t}.logical_not()", False),
    ("isnan", "{t}.isnan()", False), ("nan_to_num", "torch.nan_to_num({t})", False),
    ("softplus", "F.softplus({t})", True), ("erf", "torch.erf({t})", True), ("leaky_relu", "F.leaky_relu({t}, 0.1)", True),
    ("hardtanh", "F.hardtanh({t})", True), ("mul_scalar", "{t} * {a}", False), ("add_scalar", "{t} + {a}", False),
    ("rsub_scalar", "{a} - {t}", False), ("div_scalar", "{t} / {a}", False), ("floordiv", "{t} // 2", False),
    ("mod", "{t} % 3", False), ("mul_size", "{t} * {n}", False), ("add_size", "{t} + {n}", False),
    ("clone", "{t}.clone()", False), ("detach", "{t}.detach()", False), ("zeros_like", "torch.zeros_like({t})", False),
    ("full_like", "torch.full_like({t}, {a})", False), ("ones_like", "torch.ones_like({t}, dtype=torch.float64)", False),
    ("sub_mean", "{t} - {t}.mean()", True), ("tril", "{t}.tril()", False), ("flip", "{t}.flip({d})", False),
    ("roll", "{t}.roll(1, {d})", False), ("cumsum", "{t}.cumsum({d})", False),
]

BINARY = [  # (kind, template)
    ("add", "{t} + {o}"), ("sub", "{t} - {o}"), ("mul", "{t} * {o}"), ("div", "{t} / {o}"), ("floordiv", "{t} // {o}"),
    ("mod", "{t} % {o}"), ("pow", "{t} ** {o}"), ("gt", "{t} > {o}"), ("lt", "{t} < {o}"), ("eq", "{t} == {o}"),
    ("ne", "{t} != {o}"), ("ge", "{t} >= {o}"), ("and", "{t} & {o}"), ("or", "{t} | {o}"), ("xor", "{t} ^ {o}"),
    ("maximum", "torch.maximum({t}, {o})"), ("minimum", "torch.minimum({t}, {o})"), ("atan2", "torch.atan2({t}, {o})"),
    ("add_alpha", "torch.add({t}, {o}, alpha=2)"), ("sub_method", "{t}.sub({o})"), ("where", "torch.where({t} > {o}, {t}, {o})"),
    ("lerp", "torch.lerp({t}, {o}, 0.25)"), ("hypot", "torch.hypot({t}, {o})"), ("mul_method", "{t}.mul({o})"),
    ("logical_and", "torch.logical_and({t}, {o})"), ("copysign", "torch.copysign({t}, {o})"),
    ("mse", "F.mse_loss({t}, {o})"), ("fma", "{t} * {o} + {t}"), ("eq_method", "{t}.eq({o})"),
]

REDUCE = [  # (kind, template, float only)
    ("sum", "{t}.sum()", False), ("sum_dim", "{t}.sum({d})", False), ("sum_keepdim", "{t}.sum({d}, keepdim=True)", False),
    ("sum_dims", "torch.sum({t}, dim=({d}, {d2}))", False), ("sum_dtype", "{t}.sum(dtype=torch.float64)", False),
    ("mean", "{t}.mean()", True), ("mean_dim", "{t}.mean({d})", True), ("mean_dims", "{t}.mean(({d}, {d2}), keepdim=True)", True),
    ("amax", "{t}.amax({d})", False), ("amin", "{t}.amin({d}, keepdim=True)", False), ("max", "{t}.max()", False),
    ("max_dim", "{t}.max({d})", False), ("max_values", "{t}.max({d}).values", False), ("min_dim_index", "{t}.min(dim={d})[1]", False),
    ("prod", "{t}.prod({d})", False), ("var", "{t}.var({d})", True), ("var_all", "{t}.var()", True),
    ("std", "{t}.std({d}, correction=0)", True), ("var_mean", "torch.var_mean({t}, {d})", True),
    ("logsumexp", "torch.logsumexp({t}, {d})", True), ("softmax", "{t}.softmax({d})", True),
    ("F_softmax", "F.softmax({t}, dim={d})", True), ("log_softmax", "{t}.log_softmax({d})", True),
    ("argmax", "{t}.argmax()", False), ("argmax_dim", "{t}.argmax({d})", False), ("argmin_keepdim", "{t}.argmin({d}, keepdim=True)", False),
    ("cumprod", "{t}.cumprod({d})", False), ("norm", "{t}.norm()", True), ("vector_norm", "torch.linalg.vector_norm({t}, dim={d})", True),
    ("all", "{t}.all()", False), ("any_dim", "{t}.any({d})", False), ("count_nonzero", "{t}.count_nonzero({d})", False),
    ("normalize", "F.normalize({t}, dim={d})", True), ("layer_norm", "F.layer_norm({t}, {t}.shape[-1:])", True),
    ("median", "{t}.median({d}).values", False), ("sort", "{t}.sort({d})", False), ("topk", "{t}.topk(1, {d})", False),
    ("aminmax", "torch.aminmax({t})", False), ("sum_float", "{t}.float().sum({d})", False),
]

VIEW = [  # (kind, template)
    ("view_flat", "{t}.view(-1)"), ("reshape_flat", "{t}.reshape(-1)"), ("reshape_2d", "{t}.reshape({t}.shape[0], -1)"),
    ("view_2d", "{t}.view({t}.size(0), -1)"), ("flatten", "{t}.flatten()"), ("flatten_from", "{t}.flatten({d})"),
    ("transpose", "{t}.transpose({d}, {d2})"), ("t", "{t}.t()"), ("mT", "{t}.mT"), ("permute", "{t}.permute({perm})"),
    ("unsqueeze", "{t}.unsqueeze({d})"), ("none_index", "{t}[None]"), ("squeeze", "{t}.squeeze()"),
    ("squeeze_dim", "{t}.squeeze({d})"), ("narrow_half", "{t}.narrow({d}, 0, {t}.shape[{d}] // 2)"),
    ("narrow_tail", "{t}.narrow({d}, 1, {t}.size({d}) - 1)"), ("select_last", "{t}.select({d}, -1)"),
    ("select_first", "{t}.select({d}, 0)"), ("unbind", "{t}.unbind({d})"), ("chunk", "{t}.chunk(2, {d})"),
    ("split", "{t}.split(2, {d})"), ("expand", "{t}.expand(2, *{t}.shape)"), ("contiguous", "{t}.contiguous()"),
    ("movedim", "{t}.movedim(0, -1)"), ("unflatten", "{t}.unflatten({d}, (1, -1))"), ("view_as", "{t}.view_as({t})"),
    ("reshape_shape", "{t}.reshape({t}.shape[::-1])"), ("view_keep_last", "{t}.view(*{t}.shape[:-1], -1)"),
    ("repeat", "{t}.repeat(2, *[1] * {t}.dim())"), ("diagonal", "{t}.diagonal()"), ("swapaxes", "{t}.swapaxes(0, -1)"),
    ("expand_as", "{t}.expand_as({t})"),
]

SLICES = [":", "1:", ":-1", "::2", "-2:", "1::2", "0", "-1", "None", "1:3", ":{n}"]

CASTS = [
    ("float", "{t}.float()"), ("double", "{t}.double()"), ("half", "{t}.half()"), ("long", "{t}.long()"), ("int", "{t}.int()"),
    ("bool", "{t}.bool()"), ("to_f64", "{t}.to(torch.float64)"), ("to_other", "{t}.to({o}.dtype)"), ("type_as", "{t}.type_as({o})"),
    ("to_kw", "{t}.to(dtype=torch.int64)"), ("to_copy", "{t}.to(torch.float32, copy=True)"),
    ("as_tensor", "torch.as_tensor({t}, dtype=torch.float64)"), ("type_str", "{t}.type({o}.type())"),
]

FACTORIES = [
    ("zeros", "torch.zeros({n}{dk})"), ("ones", "torch.ones({n}, {m}{dk})"), ("full", "torch.full(({n},), {a}{dk})"),
    ("arange", "torch.arange({n}{dk})"), ("arange_step", "torch.arange(0, {n}, 2{dk})"), ("eye", "torch.eye({n}{dk})"),
    ("linspace", "torch.linspace(0, 1, {n}{dk})"), ("new_zeros", "{t}.new_zeros({t}.shape)"),
    ("new_ones", "{t}.new_ones(({n}, 2))"), ("zeros_shape", "torch.zeros({t}.shape, dtype=torch.int64{dk})"),
    ("tensor", "torch.tensor([{n}, {m}]{dk})"), ("tensor_scalar", "torch.tensor({a}{dk})"),
    ("new_full", "{t}.new_full({t}.shape, {a})"), ("empty_fill", "torch.empty({t}.shape{dk}).fill_({a})"),
    ("scalar_tensor", "torch.scalar_tensor({n}{dk})"),
]

MATMUL = [
    ("matmul", "{t} @ {o}"), ("torch_matmul", "torch.matmul({t}, {o})"), ("mm", "{t}.mm({o})"), ("bmm", "torch.bmm({t}, {o})"),
    ("gram", "{t} @ {t}.mT"), ("gram_t", "{t}.mT @ {t}"), ("einsum_dot", "torch.einsum('...i,...i->...', {t}, {o})"),
    ("outer", "torch.outer({t}, {o})"), ("linear", "F.linear({t}, {o})"), ("rowdot", "({t} * {o}).sum(-1)"),
]

INDEX = [
    ("mask", "{t}[{t} > 0]"), ("mask_var", "{t}[{m}]"), ("tensor_index", "{t}[torch.tensor([0, -1]{dk})]"),
    ("list_index", "{t}[[0, -1]]"), ("list_index_dim1", "{t}[:, [1, 0]]"), ("int_tensor_var", "{t}[{i}]"),
    ("arange_flip", "{t}[torch.arange({t}.shape[0]{dk}).flip(0)]"),
    ("index_select", "{t}.index_select({d}, torch.arange({t}.shape[{d}]{dk}) // 2)"),
    ("gather", "{t}.gather({d}, {t}.argsort({d}))"), ("masked_fill", "{t}.masked_fill({t} < 0, {a})"),
    ("take_along", "torch.take_along_dim({t}, {t}.argmax({d}, keepdim=True), {d})"), ("nonzero", "{t}.nonzero()"),
    ("where1", "torch.where({t} > 0)"), ("masked_select", "{t}.masked_select({t} > 0)"),
    ("argmax_index", "{t}.flatten()[{t}.argmax()]"),
]

COMBINE = [
    ("cat", "torch.cat([{t}, {o}], {d})"), ("cat_self", "torch.cat(({t}, {t} * 2))"), ("stack", "torch.stack([{t}, {o}])"),
    ("stack_dim", "torch.stack([{t}, {t}], {d})"), ("broadcast", "torch.broadcast_tensors({t}, {o})"),
    ("where_mask", "torch.where({m}, {t}, {o})"), ("expand_other", "{t}.expand_as({o})"),
]

ATTENTION = [  # (kind, template) over a floating [..., L, E] tensor of 3 or 4 dimensions
    ("sdpa", "F.scaled_dot_product_attention({t}, {t}, {t})"),
    ("sdpa_causal", "F.scaled_dot_product_attention({t}, {t} * 0.5, {t}, is_causal=True)"),
    ("sdpa_bool_mask", "F.scaled_dot_product_attention({t}, {t}, {t}, attn_mask=({t} @ {t}.mT) > 0)"),
    ("sdpa_float_mask", "F.scaled_dot_product_attention({t}, {t}, {t}, attn_mask=({t} @ {t}.mT) * 0.1, scale=0.5)"),
    ("sdpa_cross", "F.scaled_dot_product_attention({t}, torch.cat([{t}, {t}], -2), torch.cat([{t}, -{t}], -2))"),
    ("sdpa_heads_split", "F.scaled_dot_product_attention(*[{t}.transpose(-3, -2)] * 3).transpose(-3, -2)"),
    ("sdpa_strides", "F.scaled_dot_product_attention({t}, {t}, {t}, is_causal=True).stride()"),
]
