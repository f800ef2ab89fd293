/* Opening a model from a Hugging Face directory: config.json and safetensors. */
#include "model/weights_internal.h"

di_status mw_open_hf(model_weights *w, const char *dir, di_error **err)
{
    (void)w;
    return mw_fail(err, DI_ERR_UNSUPPORTED, "%s: Hugging Face directories are not loaded yet", dir);
}
