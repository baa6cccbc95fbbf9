package cuda

import "os"

func osMkdirTemp() (string, error) { return os.MkdirTemp("", "graphpipe-cuda-emu-") }
