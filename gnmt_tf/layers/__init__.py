"""The building blocks of section 3: the LSTM cell of eq. 10-11, the masked time loop, the residual stack, attention."""
