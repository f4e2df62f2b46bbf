"""The matrix a user writes, read into job specs (pure: nothing runs, nothing is written).

    load           a matrix file to its jobs: read, validate, resolve, expand (``load_matrix``)
    yaml_file      YAML read (each key once, errors with lines) and written
    schema         the matrix's keys, their types and bounds (pydantic)
    explain        validation errors in one line each, with the key path
    options        the allow-list: which llama-server options a job may pass, their values
    option_names   every spelling of an option (aliases, negations, renames) to one name
    flags          flags as a matrix spells them, and as argv
    cmake_options  the cmake options a source build may ask for
    cuda_arch      a CUDA architecture list
    files          file names a matrix or job gives, and the one way a node joins them
    sources        git sources: a ref resolved to a commit, git run safely
    build_refs     builds as a job names them; refs resolved once per load
    model_refs     models and draft models as a job names them
    prompts        the matrix's prompts and its prompt-length tiers
    expansion      a matrix expanded into its jobs, every flag checked
    spec           the job spec (``JobSpec``), its key and design
    crossbuild     one job across two commits of a build (``farm track --paired``, bisect)
    starter        the matrices ``farm init`` and ``farm ab`` write
"""
