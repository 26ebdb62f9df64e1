"""What the config's paths catalog names, read without building anything (no torch: ``tools/preflight.py`` and
``tools/check_recipe.py`` judge a run with it before any rank starts): each dataset's catalog entry and files, the
categories of an annotation file, and the number of classes the data gives the model."""
import json

from ..utils.errors import DatasetError
from ..utils.imports import catalog_get, load_catalog

NUM_CLASSES_KEY = "MODEL.ROI_BOX_HEAD.NUM_CLASSES"


def catalog_entries(cfg, names, is_train):
    """``[(name, entry), ...]`` of the datasets ``names`` of DATASETS.TRAIN (``is_train``) or TEST, as the catalog
    gives them (``{"factory": ..., "args": {...}}``)."""
    catalog = load_catalog(cfg.PATHS_CATALOG).DatasetCatalog
    key = f"DATASETS.{'TRAIN' if is_train else 'TEST'}"
    if not names:
        raise DatasetError(f"{key} is empty")
    out = []
    for name in names:
        try:
            out.append((name, catalog_get(catalog, name, cfg.DATASETS.DATA_DIR)))
        except KeyError as e:  # the catalog's message names the dataset and the known ones
            raise DatasetError(f"{key}: {e.args[0] if e.args else e}") from None
        except Exception as e:  # noqa: BLE001 - a site's catalog (maskrcnn-benchmark's: RuntimeError)
            raise DatasetError(f"{key}: the paths catalog cannot give '{name}': {type(e).__name__}: "
                               f"{str(e).splitlines()[0] if str(e) else ''}") from None
        entry = out[-1][1]
        factory = entry.get("factory") if isinstance(entry, dict) else None
        args = entry.get("args") if isinstance(entry, dict) else None
        if factory != "COCODataset" or not isinstance(args, dict) or \
                not all(isinstance(args.get(k), str) for k in ("root", "ann_file")):
            given = f"a {factory}" if factory != "COCODataset" else f"a COCODataset of args {args!r:.80}"
            raise DatasetError(f"{key}: the paths catalog gives '{name}' as {given}: this package reads "
                               "COCO-format datasets (factory COCODataset, args root and ann_file)")
    return out


def dataset_paths(cfg):
    """``(key, name, image folder, annotation file)`` of every dataset of DATASETS.TRAIN and TEST, as the catalog
    resolves them (nothing is opened)."""
    out = []
    for is_train, names in ((True, cfg.DATASETS.TRAIN), (False, cfg.DATASETS.TEST)):
        key = f"DATASETS.{'TRAIN' if is_train else 'TEST'}"
        for name, entry in catalog_entries(cfg, names, is_train):
            out.append((key, name, entry["args"]["root"], entry["args"]["ann_file"]))
    return out


def read_categories(ann_file):
    """The ``categories`` of a COCO json as ``[(id, name), ...]`` in the file's order, without parsing the rest of the
    file when it is large (COCO train is 450 MB; its category list is at the end): the bytes are searched for the
    ``"categories"`` key and only its list is decoded. Falls back to reading the whole file."""
    try:
        with open(ann_file, "rb") as f:
            data = f.read()
    except OSError as e:
        raise DatasetError(f"cannot read annotation file '{ann_file}': {e.strerror}") from None
    cats = None
    decoder = json.JSONDecoder()
    at = data.rfind(b'"categories"')
    if at >= 0:
        start = data.find(b"[", at)
        colon = data.find(b":", at)
        if 0 <= colon < start and not data[at + 12:colon].strip():
            try:
                cats, _ = decoder.raw_decode(data[start:].decode("utf-8", "replace"))
            except ValueError:
                cats = None
    if not (isinstance(cats, list) and all(isinstance(c, dict) and "id" in c for c in cats)):
        try:
            cats = json.loads(data).get("categories", [])
        except (ValueError, AttributeError) as e:
            raise DatasetError(f"annotation file '{ann_file}' is not valid COCO json: {e}") from None
    check_categories(cats, ann_file)
    return [(c["id"], str(c.get("name", c["id"]))) for c in cats]


def check_categories(cats, ann_file):
    """COCO's categories: a list of ``{"id": int, "name": str}``, each id once (pycocotools indexes them by id);
    one DatasetError line naming the file otherwise (the preflight's read and the dataset's check alike)."""
    if not isinstance(cats, list):
        raise DatasetError(f"annotation file '{ann_file}': \"categories\" is a {type(cats).__name__}, not a list")
    seen = set()
    for c in cats:
        if not (isinstance(c, dict) and type(c.get("id")) is int):
            name = c.get("name") if isinstance(c, dict) else c
            raise DatasetError(f"category {name!r:.60} in '{ann_file}' has no integer id")
        if c["id"] in seen:
            raise DatasetError(f"category id {c['id']} is listed twice in '{ann_file}'")
        seen.add(c["id"])


def describe_categories(cats):
    ids = [c for c, _ in cats]
    shown = ", ".join(map(str, ids[:12])) + (", ..." if len(ids) > 12 else "")
    return f"{len(cats)} categories (ids {shown})"


def num_classes_from_data(cfg, is_train=True):
    """``(categories + 1, description)`` of the datasets of DATASETS.TRAIN (or TEST), from their annotation
    files' category lists alone (:func:`read_categories`: no images, no annotations parsed); the datasets must
    agree."""
    names = cfg.DATASETS.TRAIN if is_train else cfg.DATASETS.TEST
    first = None
    for name, entry in catalog_entries(cfg, names, is_train):
        cats = read_categories(entry["args"]["ann_file"])
        if first is None:
            first = (name, cats)
        elif cats != first[1]:
            raise DatasetError(f"datasets '{first[0]}' and '{name}' have different categories "
                               f"({describe_categories(first[1])} vs {describe_categories(cats)})")
    return len(first[1]) + 1, f"'{first[0]}': {describe_categories(first[1])}"
