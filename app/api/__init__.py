"""HTTP wire layer of the data plane: error model, OpenAI wire shapes, routers."""
