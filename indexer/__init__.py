"""The index: building (`building/`) over the loader (`index`) over ANN search (`ann/`), reading
corpora (`reading/`) and encoding (`encoding/`), all over the format and its stores (`store/`)."""
