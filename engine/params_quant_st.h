/* params_quant_st.h — the NF4 form of a table's quantised tensors in safetensors files (engine/params_quant_st.c:
 * the names, checksums and checks). */
#ifndef RRFP_PARAMS_QUANT_ST_H
#define RRFP_PARAMS_QUANT_ST_H

#include "engine/params.h"
#include "engine/safetensors.h"

/* Add the NF4 form of every quantised tensor of pt to w (with checksums and its "nf4.NAME" description); returns
 * the host copies w points at: free them with params_quant_st_free after st_writer_write. */
void* params_quant_st_add(StWriter* w, const ParamTable* pt);
void params_quant_st_free(void* host);
/* Set every quantised tensor of pt whose NF4 form one of the nf files holds from it, as stored (checked: dtypes,
 * shapes against the table's, the description, the checksums); a tensor without one keeps what the values read
 * quantised to, or, with `require`, is an error naming it. Returns 0 or -1 (err set). */
int params_quant_st_read(const StFile* f, int nf, ParamTable* pt, int require, char* err, size_t err_len);

#endif
