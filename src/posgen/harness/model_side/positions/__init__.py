"""Where a forward's planned positions enter the model: the plan, the rotary embedding,
chosen layers and heads, a learned table or an ALiBi bias."""
