A="$HOME"
B=$(id)
