"""Model pairs: the catalog, offline packs, loading (device, precision), the shared model cache."""

from playground.models.cache import MODELS, LoadedPair, ModelCache, fast_verify_default, load_pair
from playground.models.catalog import (
    DEFAULT_PAIR,
    PACK_PREFIX,
    PAIRS,
    Pair,
    default_pair,
    display_name,
    get_pair,
    pairs,
)
from playground.models.load import (
    HUB_ID,
    check_compatible,
    choose_device,
    default_draft_precision,
    default_target_precision,
    draft_fallback,
    eos_ids,
    estimate_bytes,
    load_dtype,
    load_model,
    load_precision,
    memory_budget,
    model_folder,
    model_roots,
    resolve,
    torch_dtype,
    trim_heap,
)
from playground.models.packs import PACKS, Pack, assemble_pack, cache_dir, convert_pack
from playground.models.size import check_config, config_params, config_size, model_config

__all__ = [name for name in dir() if not name.startswith("__")]
