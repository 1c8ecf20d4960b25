"""Innocent ``rope_kv_write`` kernels that import small libraries which change the import machinery
when first imported, as real libraries do (an own-namespace finder put first on ``sys.meta_path``, a
path hook put first with its own ``sys.path`` entry, a type-checking style hook that wraps the loader of
every module it sees, a vendored folder put first on ``sys.path``).  Each computes the reference; none
changes what any other module resolves to, so none may be blamed (``import_hooks.k_*:rope_kv_write``)."""
