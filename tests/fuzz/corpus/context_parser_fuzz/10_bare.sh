NETWORK=YES
ETH0_IP=10.0.0.5
B=
M=a,b@c%d^e#f
